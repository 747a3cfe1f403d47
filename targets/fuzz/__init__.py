"""Differential fuzzing against vLLM: presets and known differences (presets.py), one trace
drawn, replayed on a target and shrunk (differential.py, shrink.py), and campaigns of many
(campaign.py), run on local workers or Ray (campaign_run.py, campaign_ray.py)."""
