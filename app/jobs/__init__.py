"""Async jobs for long documents: state that outlives replicas and restarts.

  model.py         a job's record, its public status body, and how a finished job is judged
  store.py         the store interface every backend implements
  stores.py        `open_store(jobs)`: the backend `jobs.store` names
  sqlite_store.py  the single-node store (`jobs.store: sqlite:///PATH`)
  redis_store.py   the fleet's store (`jobs.store: redis://HOST:PORT/DB`, AOF on)
  runner.py        the JobRunner deployment: claims jobs under a lease, sends their pages through the graph

No job state and no document byte lives only in one replica's memory: every replica reads
and writes the store, so any ingress answers for any job, and a runner that dies mid-job
leaves a lease that lapses and is taken over from the pages not yet done.
"""
