"""What reviewers and operators read: the PR report, base-against-head review, explain.

report/data.py     the prover's results, replayed, with their generated test modules
report/story.py    a counterexample in words: the sentence, the changed variables, vLLM lines
report/mermaid.py  a counterexample as a Mermaid sequenceDiagram
report/render.py   `make report`: build/report/ (summary + one page per counterexample)
report/check.py    renders every Markdown page and diagram in headless Chromium (Mermaid)
report/observe.py  what a vLLM tree does on a case, whatever the model predicts
report/review.py   `make review BASE=... HEAD=...`: what a change to vLLM fixes or breaks
report/explain.py  `make explain COUNTERS=...`: which mechanisms reach an operator's counters
"""
