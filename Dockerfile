# Airflow image for the Alibaba Cloud training pipelines.
#
# Extends the official image, as the Airflow docs recommend for anything beyond a quick try-out:
# dependencies are baked in at build time instead of being pip-installed on every container start
# through _PIP_ADDITIONAL_REQUIREMENTS.
#
#   docker compose build                                         # production workers
#   docker compose build --build-arg WITH_LOCAL_TRAINING=true    # + torch for the local backend
#
# The project targets Python 3.11 (pyproject.toml) and constraints.txt is locked on 3.11, so the
# python3.11 flavour of apache/airflow:3.3.2 is used; the plain 3.3.2 tag carries the image's
# default Python, which would not match the lock.
ARG AIRFLOW_VERSION=3.3.2
ARG PYTHON_VERSION=3.11
FROM apache/airflow:${AIRFLOW_VERSION}-python${PYTHON_VERSION}

# ARGs declared before FROM are not visible after it; re-declare the ones used below.
ARG AIRFLOW_VERSION
# true: also install requirements-training.txt (CPU torch + numpy) so that the worker can run the
# local torchrun backend itself. Production workers only submit jobs to PAI-DLC / ACK and never
# import torch, so the default image stays without it (several hundred MB smaller).
ARG WITH_LOCAL_TRAINING=false

# Packages are installed as the airflow user, never as root (official image convention).
USER airflow

# Dependencies first so this layer is cached while DAG/plugin code changes.
# requirements.txt holds the top-level pins, constraints.txt the full transitive lock.
# Naming apache-airflow==${AIRFLOW_VERSION} again keeps pip from ever moving the Airflow that
# ships in the base image (the build fails instead if requirements.txt disagrees with the tag).
COPY requirements.txt constraints.txt /
RUN pip install --no-cache-dir "apache-airflow==${AIRFLOW_VERSION}" \
        -r /requirements.txt -c /constraints.txt

# Optional local training backend. PyTorch's CPU index serves torch==2.13.0 as 2.13.0+cpu (a few
# hundred MB instead of the CUDA build on PyPI); -c keeps the dependencies torch shares with
# Airflow (jinja2, fsspec, filelock, typing-extensions, ...) at the locked versions.
COPY requirements-training.txt /
RUN if [ "${WITH_LOCAL_TRAINING}" = "true" ]; then \
        pip install --no-cache-dir --extra-index-url https://download.pytorch.org/whl/cpu \
            -r /requirements-training.txt -c /constraints.txt; \
    else \
        echo "WITH_LOCAL_TRAINING=${WITH_LOCAL_TRAINING}: skipping requirements-training.txt"; \
    fi

# Project code. Airflow puts /opt/airflow/plugins on sys.path, which is how DAGs, the worker and
# the triggerer import the aliyun_training package. Baking the code in makes the image usable
# without bind mounts (e.g. on Kubernetes); docker-compose.yaml mounts the same directories over
# these copies for local development.
COPY --chown=airflow:0 plugins/ /opt/airflow/plugins/
COPY --chown=airflow:0 dags/ /opt/airflow/dags/
COPY --chown=airflow:0 include/ /opt/airflow/include/

# Root of the local backend's state: object-store stand-in, CPFS stand-in, run directories and
# artifacts. docker-compose.yaml sets the same value and mounts ./data here.
ENV ALIYUN_TRAINING_LOCAL_ROOT=/opt/airflow/data
RUN mkdir -p /opt/airflow/data
