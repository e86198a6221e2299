"""Airflow building blocks that run distributed training on Alibaba Cloud (PAI-DLC, ACK) or locally.

Importing the package is cheap on purpose: DAG files import it at parse time, so SDK clients and
torch are imported only inside the code that uses them.
"""
