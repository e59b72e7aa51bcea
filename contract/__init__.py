"""The store contract 1.1: our wording, the OpenAPI document and a conformance suite."""
