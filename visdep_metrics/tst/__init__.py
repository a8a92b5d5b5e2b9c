"""What the test set's own text gives away: the test-set stress test (TsT-RF, TsT-LLM) and Iterative Bias Pruning."""
