"""What the tests and the benchmarks in load/ share, so that neither imports the other: free ports,
numbered test documents, a real Redis server, a readiness wait, a raw HTTP reader, process-group
cleanup. Nothing here runs in the service."""
