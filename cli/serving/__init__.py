"""Serving from several worker processes, shared by `brain-store serve` and `brain-connector serve`."""

# How long both servers keep an idle keep-alive connection (uvicorn's default, made explicit).
# A proxy that pools connections to us must drop idle ones sooner: if it sends a request on a
# connection we are closing, it answers 502 (Caddy keeps idle upstream connections 2 minutes
# unless told otherwise; deploy/Caddyfile* set 3 s, tests/ops/test_deploy.py holds them to it).
KEEP_ALIVE_SECONDS = 5
