# The six runs: seed 1's identified gap (run 3 of the 32x64 recipe) and the true gap, each with PPO seeds 0, 1, 2.
cd "$(dirname "$0")"
for seed in 1 0 2; do
  bash run.sh id_p$seed bench_results/sim2real_session/ppo_seed_spread_2026-11-29/ident_s1.yaml \
    bench_results/sim2real_session/ppo_seed_spread_2026-11-29/spread_s1 $seed
  bash run.sh true_p$seed config/gaps/legged_example_sim.yaml \
    bench_results/sim2real_session/ppo_seed_spread_2026-11-29/spread_s1 $seed
done
