"""The brain engine: pure logic over an in-memory brain (no HTTP, no store)."""
