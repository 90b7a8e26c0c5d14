"""`evalkit bisect`: which commit of the engine broke a cell of the matrix.

commits.py (good..bad of the cell's source repo), search.py (the binary search, untestable
commits skipped), ends.py and step.py (the ends as full cells, each middle commit as a step that
stops as soon as a sequential test decides), state.py (bisect.json), driver.py (`run_bisect`).
"""
