"""Start a KRaft broker from KAFKA_* variables (KAFKA_LOG_DIRS -> log.dirs), like apache/kafka:
``_`` is ``.``, ``__`` is ``_``, ``___`` is ``-``. Formats the log dirs on first start."""

import os
import pathlib
import subprocess

props = {}
for name, value in os.environ.items():
    if name.startswith("KAFKA_") and name != "KAFKA_HEAP_OPTS":
        key = name[6:].lower().replace("___", "-").replace("__", "\0").replace("_", ".")
        props[key.replace("\0", "_")] = value
config = pathlib.Path("/opt/kafka/server.properties")
config.write_text("".join(f"{k}={v}\n" for k, v in sorted(props.items())))
classpath = "/opt/kafka/lib/*"
if not (pathlib.Path(props["log.dirs"]) / "meta.properties").exists():
    cluster = os.environ.get("CLUSTER_ID", "gridledgerComposeLocal0")
    subprocess.run(
        [
            "java",
            "-cp",
            classpath,
            "kafka.tools.StorageTool",
            "format",
            "-t",
            cluster,
            "-c",
            str(config),
        ],
        check=True,
    )
os.execvp("java", ["java", "-Xmx512m", "-cp", classpath, "kafka.Kafka", str(config)])
