# Kafka from Debian's OpenJDK and the Maven Central jars `dev up` fetched (copied into
# the build context as lib/), configured from KAFKA_* variables like apache/kafka.
FROM gridledger/python:latest
RUN apt-get update -q && apt-get install -y -q --no-install-recommends openjdk-17-jre-headless \
    && rm -rf /var/lib/apt/lists/*
COPY lib /opt/kafka/lib
COPY kafka-entrypoint.py /opt/kafka/entrypoint.py
ENTRYPOINT ["python3", "/opt/kafka/entrypoint.py"]
