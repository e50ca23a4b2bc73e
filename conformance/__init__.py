"""The conformance suite (installed as ``unified_opt.conformance``): cases, one worker
process per backend, comparison against the float64 numpy oracle with a tolerance
derived from the float32 noise floor, the failure explainer, and the reports."""
