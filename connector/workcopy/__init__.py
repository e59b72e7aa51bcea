"""Working copies of users' brains: the store client and the manager that pulls, caches and pushes."""
