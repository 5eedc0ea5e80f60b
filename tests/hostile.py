"""What hostile jobs run, shared by the agent's tests and the adversarial suite."""

# Forks until the container's pids limit refuses, then says how far it got; the children
# sleep, so they hold their pids until the container ends.
FORK_BOMB = """
import os, time
children = 0
while True:
    try:
        pid = os.fork()
    except OSError as exc:
        print(f"forked {children}: {exc.strerror}", flush=True)
        break
    if pid == 0:
        time.sleep(60)
        os._exit(0)
    children += 1
"""
