"""The MCP side of the connector: tool declarations, tolerant arguments, handlers and the SDK server."""
