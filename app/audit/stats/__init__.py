"""The statistics of an audit: confidence bounds on a membership test (bounds), honest thresholds
(thresholds), trials (trials), the exact estimator (exact), per-record risk (records), the auditor over
(C1, C0) scores (auditor) and the four-outcome verdict with its power (verdict)."""
