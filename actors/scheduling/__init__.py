"""Where the runtime's work runs (internal: nothing here is public API).

`pool.WorkerPool` is the registry's shared worker pool, `pooled.PooledActor` a
pykka actor that owns no thread and is handled on that pool, and `hooks` the
scheduling points a deterministic scheduler (`actors.testing.Harness`) takes
control at.
"""
