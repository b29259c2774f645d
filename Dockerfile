# syntax=docker/dockerfile:1
# The platform's image: the official Apache Airflow image of the version pinned in uv.lock,
# Java 17 (spark-submit starts a JVM), the project installed exactly from uv.lock, and the
# Maven-fetched Spark jars (Kafka connector, Delta) baked in: nothing downloads when a
# container starts. No secret is built in: passwords, keys and connections come from the
# environment of the running container (docker-compose.yaml, or the cluster's manifests).
#
#   docker build -t ingest-platform:latest .
#
# tests/unit/test_dockerfile.py checks these facts (base tag = locked Airflow, Java 17, jars
# copied where INGEST_JARS_DIR points, no secret in ENV/ARG) without a Docker engine.

ARG AIRFLOW_VERSION=3.3.2
ARG PYTHON_VERSION=3.11
# The uv of the Makefile (UV_VERSION): the same resolver reads the same lock file.
ARG UV_VERSION=0.13.8

# --- JVM jars: Maven Central at build time only, pinned by include/maven ------------------
FROM maven:3.9.11-eclipse-temurin-17 AS jars
WORKDIR /build
COPY include/maven/ include/maven/
# The Spark jars and the platform's java.nio local file system (spark.local_file_system), not
# the broker's: the compose stack and clusters run their own Kafka brokers.
RUN mvn -B -q -Dstyle.color=never -f include/maven/pom.xml -pl spark,localfs,logstore -am package \
        -Djars.dir=/build/jars

# --- requirements: every Python dependency, pinned and hashed, from uv.lock ----------------
FROM apache/airflow:${AIRFLOW_VERSION}-python${PYTHON_VERSION} AS requirements
ARG UV_VERSION
RUN pip install --no-cache-dir "uv==${UV_VERSION}"
COPY pyproject.toml uv.lock /tmp/project/
RUN cd /tmp/project \
    && python -m uv export --locked --no-dev --no-emit-project --format requirements-txt \
        --output-file /tmp/requirements.txt

# --- the image ---------------------------------------------------------------------------
FROM apache/airflow:${AIRFLOW_VERSION}-python${PYTHON_VERSION}
ARG TARGETARCH=amd64

USER root
RUN apt-get update \
    && apt-get install -y --no-install-recommends openjdk-17-jre-headless \
    && apt-get autoremove -yqq --purge \
    && apt-get clean \
    && rm -rf /var/lib/apt/lists/*
ENV JAVA_HOME=/usr/lib/jvm/java-17-openjdk-${TARGETARCH}

# The project runs from its source tree (settings find include/ beside ingest_core/).
ENV INGEST_JARS_DIR=/opt/ingest-platform/jars \
    INGEST_HOME=/opt/ingest \
    AIRFLOW__CORE__DAGS_FOLDER=/opt/ingest-platform/dags \
    AIRFLOW__CORE__LOAD_EXAMPLES=False
COPY --from=jars /build/jars/spark /opt/ingest-platform/jars/spark
COPY --from=jars /build/jars/localfs /opt/ingest-platform/jars/localfs
COPY pyproject.toml uv.lock README.md /opt/ingest-platform/
COPY ingest_core/ /opt/ingest-platform/ingest_core/
COPY ingestctl/ /opt/ingest-platform/ingestctl/
COPY spark_jobs/ /opt/ingest-platform/spark_jobs/
COPY plugins/ /opt/ingest-platform/plugins/
COPY dags/ /opt/ingest-platform/dags/
COPY include/ /opt/ingest-platform/include/
# INGEST_HOME: Delta tables, checkpoints, backups and state (volumes in docker-compose.yaml).
RUN mkdir -p /opt/ingest \
    && chown -R airflow:0 /opt/ingest /opt/ingest-platform \
    && chmod -R g+rwX /opt/ingest

USER airflow
COPY --from=requirements /tmp/requirements.txt /tmp/requirements.txt
# Exactly the locked versions (hashes checked, no resolver): apache-airflow in the lock is
# the base image's own version, so pip keeps it; then the project itself, editable, so that
# it runs from /opt/ingest-platform.
RUN pip install --no-cache-dir --no-deps --require-hashes -r /tmp/requirements.txt \
    && pip install --no-cache-dir --no-deps -e /opt/ingest-platform \
    && python -c "import ingest_core.settings, ingest_platform.operators" \
    && rm /tmp/requirements.txt
WORKDIR /opt/ingest-platform
# The Spark drivers' class-data archive (spark_jobs/class_data_archive.py), recorded with this
# image's JDK, pyspark and jars: the scheduled jobs' drivers map it instead of loading Spark's
# and Delta's classes again. It only saves start time (a driver without it runs the same), so a failed
# recording is printed and the build goes on.
RUN python -m spark_jobs.class_data_archive \
    || echo "class-data archive not recorded: Spark drivers start without it"
