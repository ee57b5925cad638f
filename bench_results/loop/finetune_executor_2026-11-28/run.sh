# A/B: the finetune node's CPU while the legged session records (offboard), old (single-threaded) vs new (events).
# usage: bash run.sh OLD_TREE NEW_TREE   (each a checkout of lowrl_ros; here: a git worktree at 6ac5136 and 5baaf4c)
# Sessions go to /tmp/abft/{old,new}{1,2}; then python3 analyse.py.
OLD=$(realpath "$1") NEW=$(realpath "$2")
PY=$(realpath "$(dirname "$0")/../../../.venv/bin/python")
export ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST ROS_LOCALHOST_ONLY=1 ROS_DOMAIN_ID=84
rm -rf /tmp/abft; mkdir -p /tmp/abft
for i in 1 2; do
  for code in old new; do
    src=$OLD; [ $code = new ] && src=$NEW
    (cd "$src" && PYTHONPATH="$src" "$PY" -m lowrl_ros.cli demo --robot legged --retrain --seconds 80 --no-record \
       --quiet --session-dir /tmp/abft/$code$i > /tmp/abft/$code$i.out 2>&1)
    echo "$code$i done $(date +%T)"
  done
done
