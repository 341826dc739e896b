"""The CPU-scale experiment family: graded arithmetic debates that SmolLM2-135M can learn (DESIGN §11).

``base.py`` holds every shared value; the five strategy configs change only the shaping section,
exactly as ``configs/{identity,...}.py`` do for the seeds' MATH-500 family.
"""
