"""The node agent: runs the attempts placed on one GPU host and appends their facts.

Modules, from the edge inwards: :mod:`inventory` (NVML or a declared file),
:mod:`runtime` (the docker SDK), :mod:`artifacts` (checkpoint and output store),
:mod:`spool` (durable append-only spool in front of the ledger), :mod:`logs` and
:mod:`meter` (pure chunking and metering), :mod:`facts` (how an agent fact is keyed and
built), :mod:`logstream` (following a container's log), :mod:`journal` (per-attempt state
that survives a restart), :mod:`attempt` (one attempt's lifecycle, in order) with its parts
:mod:`emitters` (its facts and streams), :mod:`container` (its container's request),
:mod:`checkpoints` and :mod:`outputs` (what it stores), :mod:`agent` (the
node: registration, heartbeats, node commands, re-attach) and :mod:`bootstrap`
(the composition root).
"""
