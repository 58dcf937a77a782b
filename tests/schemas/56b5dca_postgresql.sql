-- autotune's schema at main 56b5dca (before migrations), as create_all made it on postgresql.
-- Generated from that commit's autotune/store/_models.py; do not edit.

CREATE TABLE autotune_jobs (
	id SERIAL NOT NULL, 
	workload VARCHAR(1024) NOT NULL, 
	workload_name VARCHAR(256), 
	status VARCHAR(16) NOT NULL, 
	options JSON NOT NULL, 
	study_name VARCHAR(256), 
	device JSON, 
	fingerprint JSON, 
	space JSON, 
	recommendation JSON, 
	error TEXT, 
	worker_id VARCHAR(256), 
	cancel_requested BOOLEAN NOT NULL, 
	attempts INTEGER NOT NULL, 
	created_at TIMESTAMP WITH TIME ZONE NOT NULL, 
	started_at TIMESTAMP WITH TIME ZONE, 
	finished_at TIMESTAMP WITH TIME ZONE, 
	heartbeat_at TIMESTAMP WITH TIME ZONE, 
	PRIMARY KEY (id)
);

CREATE INDEX ix_autotune_jobs_status ON autotune_jobs (status);

CREATE TABLE autotune_trials (
	id SERIAL NOT NULL, 
	job_id INTEGER NOT NULL, 
	number INTEGER NOT NULL, 
	optuna_number INTEGER, 
	phase VARCHAR(16) NOT NULL, 
	config JSON NOT NULL, 
	config_key VARCHAR(1024) NOT NULL, 
	outcome VARCHAR(16) NOT NULL, 
	pruned BOOLEAN NOT NULL, 
	interrupted BOOLEAN NOT NULL, 
	within_budget BOOLEAN, 
	samples_per_s FLOAT, 
	step_time_median_ms FLOAT, 
	step_time_p90_ms FLOAT, 
	data_wait_fraction FLOAT, 
	peak_memory_bytes BIGINT, 
	peak_memory_allocated_bytes BIGINT, 
	peak_memory_reserved_bytes BIGINT, 
	peak_host_memory_bytes BIGINT, 
	device_utilization FLOAT, 
	losses_finite BOOLEAN, 
	steps INTEGER, 
	warmup_steps INTEGER, 
	window_s FLOAT, 
	error TEXT, 
	exit_code INTEGER, 
	signal VARCHAR(32), 
	fingerprint JSON, 
	started_at TIMESTAMP WITH TIME ZONE NOT NULL, 
	finished_at TIMESTAMP WITH TIME ZONE, 
	duration_s FLOAT, 
	PRIMARY KEY (id), 
	FOREIGN KEY(job_id) REFERENCES autotune_jobs (id) ON DELETE CASCADE
);

CREATE INDEX ix_autotune_trials_job_key ON autotune_trials (job_id, config_key);
