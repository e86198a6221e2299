"""The provider's pages, served by Airflow's API server behind its authentication: each pipeline's
runs, each run's report and each dry run's plan (``app.py``), at the addresses ``urls.py`` builds."""
