"""OFF-BOARD: continue a deployed policy with PPO in the identified simulator (issue 27), in local worker
processes or on a Ray cluster, and release it as the robot's int8 artifact through the release gates.
Imports train (the PPO), sim, finetune (the robot file's reward), compress (the gates) and torch; never
imported by the on-robot runtime. Entry point: ``retrain()`` (retrain.py), or `lowrl retrain`."""
