"""Shared brains: members and roles, agent keys, the per-brain audit log."""
