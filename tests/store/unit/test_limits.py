"""Token-bucket limiter and client address resolution behind trusted proxies."""

from __future__ import annotations

import ipaddress
import threading

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from common.limits import TokenBucketLimiter, TrustedProxies, client_address
from common.limits.address import parse_ip
from common.limits.rate import retry_after_header

# ---------------------------------------------------------------- token bucket


def test_burst_then_refused_with_retry_after() -> None:
    limiter = TokenBucketLimiter(60, 3)  # one token per second
    assert [limiter.hit("a", now=100.0) for _ in range(3)] == [None, None, None]
    wait = limiter.hit("a", now=100.0)
    assert wait == pytest.approx(1.0)
    assert limiter.hit("a", now=100.5) == pytest.approx(0.5)
    assert limiter.hit("a", now=101.0) is None
    assert limiter.hit("a", now=101.0) == pytest.approx(1.0)


def test_peek_takes_nothing() -> None:
    limiter = TokenBucketLimiter(60, 2)
    assert limiter.peek("a", now=0.0) is None
    assert len(limiter) == 0  # peeking an unknown key remembers nothing
    assert limiter.hit("a", now=0.0) is None
    assert [limiter.peek("a", now=0.0) for _ in range(5)] == [None] * 5
    assert limiter.hit("a", now=0.0) is None
    assert limiter.peek("a", now=0.0) == pytest.approx(1.0)
    assert limiter.peek("a", now=0.25) == pytest.approx(0.75)
    assert limiter.peek("a", now=1.0) is None
    assert limiter.hit("a", now=1.0) is None


def test_keys_are_independent() -> None:
    limiter = TokenBucketLimiter(60, 1)
    assert limiter.hit("a", now=0.0) is None
    assert limiter.hit("a", now=0.0) is not None
    assert limiter.hit("b", now=0.0) is None


def test_no_double_burst_at_window_edges() -> None:
    # A fixed per-minute window would allow 30 requests at 59.9 s and 30 more at 60.0 s.
    limiter = TokenBucketLimiter(30, 30)
    allowed_first = sum(limiter.hit("u", now=59.9) is None for _ in range(100))
    allowed_second = sum(limiter.hit("u", now=60.0) is None for _ in range(100))
    assert allowed_first == 30
    assert allowed_second == 0


def test_refused_requests_do_not_extend_the_wait() -> None:
    limiter = TokenBucketLimiter(60, 1)
    assert limiter.hit("k", now=0.0) is None
    for step in range(10):
        assert limiter.hit("k", now=step * 0.09) is not None
    assert limiter.hit("k", now=1.0) is None


def test_clock_stepping_back_gives_no_tokens() -> None:
    limiter = TokenBucketLimiter(60, 1)
    assert limiter.hit("k", now=100.0) is None
    assert limiter.hit("k", now=50.0) is not None
    assert limiter.hit("k", now=100.5) is not None
    assert limiter.hit("k", now=101.0) is None


def test_burst_defaults_to_a_minute_of_rate() -> None:
    limiter = TokenBucketLimiter(5)
    assert sum(limiter.hit("k", now=0.0) is None for _ in range(10)) == 5


@pytest.mark.parametrize("rate,burst", [(0, 1), (-1, 1), (10, 0), (10, 0.5)])
def test_invalid_parameters(rate: float, burst: float) -> None:
    with pytest.raises(ValueError):
        TokenBucketLimiter(rate, burst)


def test_memory_is_bounded_by_max_keys() -> None:
    limiter = TokenBucketLimiter(60, 5, max_keys=1000)
    for index in range(50_000):
        limiter.hit(f"attacker-{index}", now=0.0)
    assert len(limiter) <= 1000


def test_idle_keys_are_evicted_without_losing_state() -> None:
    limiter = TokenBucketLimiter(60, 2)  # full again after 2 idle seconds
    for index in range(500):
        limiter.hit(f"k{index}", now=float(index))
    # Only keys used in the last couple of seconds are still remembered.
    assert len(limiter) < 10
    # A key that was exhausted recently is not forgotten by idle eviction.
    busy = TokenBucketLimiter(60, 2)
    busy.hit("hot", now=0.0)
    busy.hit("hot", now=0.0)
    for index in range(100):
        busy.hit(f"cold{index}", now=0.5)
    assert busy.hit("hot", now=0.5) is not None


def test_thread_safety_counts_exactly() -> None:
    limiter = TokenBucketLimiter(1, 1000)  # refill negligible during the test
    allowed = []

    def worker() -> None:
        count = 0
        for _ in range(500):
            if limiter.hit("shared") is None:
                count += 1
        allowed.append(count)

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert 1000 <= sum(allowed) <= 1001


def test_retry_after_header_rounds_up() -> None:
    assert retry_after_header(0.01) == "1"
    assert retry_after_header(1.0) == "1"
    assert retry_after_header(1.2) == "2"
    assert retry_after_header(0) == "1"


@settings(max_examples=100, deadline=None)
@given(
    rate=st.integers(min_value=1, max_value=600),
    burst=st.integers(min_value=1, max_value=50),
    gaps=st.lists(st.floats(min_value=0, max_value=5, allow_nan=False), min_size=1, max_size=300),
)
def test_never_more_than_burst_plus_rate_over_any_interval(rate: int, burst: int, gaps: list[float]) -> None:
    limiter = TokenBucketLimiter(rate, burst)
    now = 1000.0
    passed: list[float] = []
    for gap in gaps:
        now += gap
        wait = limiter.hit("k", now=now)
        if wait is None:
            passed.append(now)
        else:
            assert wait > 0
    per_second = rate / 60.0
    for i in range(len(passed)):
        for j in range(i, len(passed)):
            assert j - i + 1 <= burst + (passed[j] - passed[i]) * per_second + 1e-6


@settings(max_examples=50, deadline=None)
@given(rate=st.integers(min_value=1, max_value=600), burst=st.integers(min_value=1, max_value=20))
def test_retry_after_is_exact(rate: int, burst: int) -> None:
    limiter = TokenBucketLimiter(rate, burst)
    for _ in range(burst):
        assert limiter.hit("k", now=10.0) is None
    wait = limiter.hit("k", now=10.0)
    assert wait is not None
    assert limiter.hit("k", now=10.0 + wait * 0.99) is not None
    assert limiter.hit("k", now=10.0 + wait * 1.0001) is None


# ---------------------------------------------------------------- trusted proxies


def test_parse_keywords_and_networks() -> None:
    trusted = TrustedProxies.parse("loopback, 10.0.0.0/8,192.0.2.7 ,2001:db8::/32")
    for address in ["127.0.0.1", "127.9.9.9", "::1", "10.200.1.1", "192.0.2.7", "2001:db8::5", "::ffff:10.0.0.1"]:
        assert address in trusted, address
    for address in ["192.0.2.8", "8.8.8.8", "172.16.0.1", "2001:db9::1", "junk", ""]:
        assert address not in trusted, address


def test_parse_uniquelocal_private_linklocal() -> None:
    unique = TrustedProxies.parse("uniquelocal")
    assert "172.31.255.255" in unique and "192.168.1.1" in unique and "fd00::1" in unique
    assert "127.0.0.1" not in unique and "172.32.0.1" not in unique
    private = TrustedProxies.parse("private")
    assert all(a in private for a in ["127.0.0.1", "10.1.1.1", "169.254.1.1", "fe80::1", "fc00::1"])
    assert "100.64.0.1" not in private and "1.1.1.1" not in private


@pytest.mark.parametrize("spec", ["", "false", "off", "none", "0", None, ()])
def test_parse_nothing_trusted(spec: object) -> None:
    trusted = TrustedProxies.parse(spec)  # type: ignore[arg-type]
    assert not trusted
    assert "127.0.0.1" not in trusted


@pytest.mark.parametrize("spec", ["true", "1", "TRUE", "yes", "*", "loopback,true", "0.0.0.0/0", "::/0"])
def test_parse_refuses_trusting_everyone(spec: str) -> None:
    with pytest.raises(ValueError, match="every"):
        TrustedProxies.parse(spec)


@pytest.mark.parametrize("spec", ["localhost", "10.0.0.0/33", "banana", "1.2.3.4.5", "loopback;private"])
def test_parse_refuses_junk_clearly(spec: str) -> None:
    with pytest.raises(ValueError, match="not an IP address"):
        TrustedProxies.parse(spec)


def test_parse_accepts_a_sequence() -> None:
    trusted = TrustedProxies.parse(("loopback", "10.0.0.0/8,192.168.0.0/16"))
    assert "192.168.3.3" in trusted and "10.1.1.1" in trusted and "::1" in trusted


# ---------------------------------------------------------------- client address

LOOP = TrustedProxies.parse("loopback")
CHAIN = TrustedProxies.parse("loopback,10.0.0.0/8")


def test_header_ignored_without_trusted_peer() -> None:
    assert client_address("203.0.113.9", "1.2.3.4", LOOP) == "203.0.113.9"
    assert client_address("203.0.113.9", "1.2.3.4", TrustedProxies()) == "203.0.113.9"
    assert client_address("127.0.0.1", "1.2.3.4", TrustedProxies()) == "127.0.0.1"


def test_right_most_untrusted_hop_wins_over_forged_left_entries() -> None:
    # The client forged "6.6.6.6"; our proxy (127.0.0.1) appended the real client 198.51.100.7.
    assert client_address("127.0.0.1", "6.6.6.6, 198.51.100.7", LOOP) == "198.51.100.7"
    # Two trusted proxies in a row.
    assert client_address("127.0.0.1", "6.6.6.6, 198.51.100.7, 10.0.0.5", CHAIN) == "198.51.100.7"
    # The same via several header lines.
    assert client_address("127.0.0.1", ["6.6.6.6", "198.51.100.7, 10.0.0.5"], CHAIN) == "198.51.100.7"


def test_all_hops_trusted_gives_left_most() -> None:
    assert client_address("127.0.0.1", "10.0.0.9, 10.0.0.5", CHAIN) == "10.0.0.9"


def test_no_header_or_empty_header() -> None:
    assert client_address("127.0.0.1", None, LOOP) == "127.0.0.1"
    assert client_address("127.0.0.1", "", LOOP) == "127.0.0.1"


@pytest.mark.parametrize(
    "xff,expected",
    [
        ("junk", "127.0.0.1"),
        ("1.2.3.4, junk", "127.0.0.1"),
        ("junk, 10.0.0.5", "10.0.0.5"),
        ("1.2.3.4,,", "127.0.0.1"),
        ("unknown", "127.0.0.1"),
        ("1.2.3.4:5678", "1.2.3.4"),
        ("[2001:db8::1]:443", "2001:db8::1"),
        ("2001:DB8::1", "2001:db8::1"),
        ("::ffff:198.51.100.7", "198.51.100.7"),
        ('"198.51.100.7"', "198.51.100.7"),
        ("1.2.3.4:port", "127.0.0.1"),
        ("[::1", "127.0.0.1"),
        ("\x00\xff", "127.0.0.1"),
        ("9" * 5000, "127.0.0.1"),
    ],
)
def test_junk_hops_never_become_the_address(xff: str, expected: str) -> None:
    assert client_address("127.0.0.1", xff, CHAIN) == expected


def test_peer_normalisation() -> None:
    assert client_address("::ffff:127.0.0.1", "198.51.100.7", LOOP) == "198.51.100.7"
    assert client_address("unknown", "198.51.100.7", LOOP) == "unknown"
    assert client_address(None, "198.51.100.7", LOOP) == "unknown"


def test_very_long_chain_is_bounded() -> None:
    header = ", ".join(["198.51.100.7"] + ["10.0.0.1"] * 10_000)
    assert client_address("127.0.0.1", header, CHAIN) == "10.0.0.1"
    header = ", ".join(["10.0.0.1"] * 10_000 + ["198.51.100.7"])
    assert client_address("127.0.0.1", header, CHAIN) == "198.51.100.7"


_ipv4 = st.ip_addresses(v=4).map(str)
_ipv6 = st.ip_addresses(v=6).map(str)
_hop = st.one_of(_ipv4, _ipv6, st.text(max_size=20))


@settings(max_examples=200, deadline=None)
@given(peer=st.one_of(_ipv4, _ipv6, st.text(max_size=10)), hops=st.lists(_hop, max_size=12))
def test_result_is_peer_or_a_real_address_from_the_header(peer: str, hops: list[str]) -> None:
    header = ", ".join(hops)
    result = client_address(peer, header, CHAIN)
    parsed_peer = parse_ip(peer)
    if parsed_peer is None:
        assert result == (peer or "unknown")
        return
    if parsed_peer not in CHAIN:
        assert result == str(parsed_peer)
        return
    # Whatever was returned is a valid address, is the peer or appears among the hops,
    # and every hop to its right is trusted.
    ipaddress.ip_address(result)
    candidates = [str(parsed_peer)] + [str(ip) for ip in map(parse_ip, header.split(",")) if ip is not None]
    assert result in candidates


@settings(max_examples=200, deadline=None)
@given(
    forged=st.lists(_hop, max_size=5),
    client=_ipv4.filter(lambda a: a not in CHAIN),
    proxies=st.lists(st.sampled_from(["10.0.0.1", "10.9.9.9", "127.0.0.1"]), max_size=4),
)
def test_forged_prefix_never_wins(forged: list[str], client: str, proxies: list[str]) -> None:
    header = ", ".join([*forged, client, *proxies])
    assert client_address("127.0.0.1", header, CHAIN) == client


def test_limit_key_counts_an_ipv6_address_with_its_slash_64() -> None:
    from common.limits import limit_key

    assert limit_key("2001:db8:1:2:3:4:5:6") == limit_key("2001:db8:1:2::ffff") == "2001:db8:1:2::/64"
    assert limit_key("2001:db8:1:3::1") == "2001:db8:1:3::/64"
    assert limit_key("::ffff:10.0.0.1") == "10.0.0.1"  # IPv4-mapped: the IPv4 address
    assert limit_key("203.0.113.9") == "203.0.113.9"
    assert limit_key("unknown") == "unknown"

