# The figures of HISTORY.md's 2026-11-29 quadruped entry beyond the session itself (run from the repository root):
# the shipped policy at the session's command under each part of the example gap, the retrained v2 under all of
# it, and how saturated the policy's outputs are. Output: run.log.
set -e
D=bench_results/sim2real_session/quadruped_2026-11-29
for g in none enc sens lat massfric kp phys full; do
  case $g in none) gap=();; full) gap=(--gap-file config/gaps/quadruped_example.yaml);; *) gap=(--gap-file $D/gaps/$g.yaml);; esac
  n=2; [ $g = full ] && n=6   # the full gap's sensor noise makes its episodes differ: more of them
  echo -n "base, gap $g: "; .venv/bin/python scripts/eval_quadruped.py models/quadruped.lowrl --episodes $n --command 0.4,0,0 "${gap[@]}" | tail -1
done
V2=$D/v2_retrained.onnx   # the session's retrained actor (fp32), copied from its offboard/retrain/
echo "v2 (retrained), full gap, per episode:"
.venv/bin/python scripts/eval_quadruped.py "$V2" --episodes 6 --command 0.4,0,0 --gap-file config/gaps/quadruped_example.yaml | tail -8
.venv/bin/python $D/saturation.py
