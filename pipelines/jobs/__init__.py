"""Jobs: run-day (the one chain every caller uses), the Airflow task functions, the demo and the generator."""
