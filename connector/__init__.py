"""The MCP connector: OAuth 2.1, working copies and the brain tools."""
