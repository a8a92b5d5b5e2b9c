"""A hand-computed example the diagnostics and the audit tests share."""

import math

import numpy as np

# A three-model toy panel on three questions with K = 2, 4, 3 (answers 0, 2, 1):
# text-only LLMs L1, L2 (blind) and one VLM V1 (blind and video). Probabilities per model and question.
K = np.array([2, 4, 3])
ANSWER = np.array([0, 2, 1])
L1 = [(0.8, 0.2), (0.1, 0.1, 0.7, 0.1), (0.2, 0.5, 0.3)]  # correct on all three
L2 = [(0.3, 0.7), (0.25, 0.25, 0.25, 0.25), (0.1, 0.8, 0.1)]  # wrong, wrong (tie -> first option), correct
V1_BLIND = [(0.6, 0.4), (0.2, 0.1, 0.5, 0.2), (0.05, 0.9, 0.05)]
V1_VIDEO = [(0.9, 0.1), (0.1, 0.2, 0.5, 0.2), (0.4, 0.3, 0.3)]



def h_norm(p):
    return -sum(x * math.log(x) for x in p) / math.log(len(p))
