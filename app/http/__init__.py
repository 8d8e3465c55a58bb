"""The front door: routes, uploads, API keys, the proxy guard, request logs, the one error boundary, readiness."""
