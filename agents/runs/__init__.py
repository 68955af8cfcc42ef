"""A run's home: its lifecycle (every status change), the driver that executes a turn, the
lease and heartbeat, the reaper and the executors.

* ``lifecycle`` — every ``Run``/``ToolCall`` status transition, one conditional UPDATE each.
* ``driver`` — ``run_turn(run_id)``: claim → ``backend.advance(turn)`` → the lifecycle's end.
* ``lease`` — worker identity and the heartbeat (``RunLease.tick``).
* ``calls`` — a run's tool calls seen from its messages: answered or open; closing open ones.
* ``reaper`` — recovers runs whose worker died.
* ``executors`` — ``enqueue_run``: embedded thread pool or Celery.

Imports point one way: ``executors`` → ``driver`` → ``backends`` → ``lifecycle``/``lease``;
``reaper`` → ``driver``, ``executors``.
"""
