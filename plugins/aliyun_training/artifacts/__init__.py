"""A run's outputs: the artifact set collected from the job, its manifest and the HTML run report."""
