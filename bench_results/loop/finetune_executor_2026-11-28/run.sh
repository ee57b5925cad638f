# A/B: the finetune node's CPU while the legged session records (offboard), old (single-threaded) vs new (events)
export ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST ROS_LOCALHOST_ONLY=1 ROS_DOMAIN_ID=84
rm -rf /tmp/abft; mkdir -p /tmp/abft
for i in 1 2; do
  for code in old new; do
    src=/work/wt; [ $code = new ] && src=/work/main  # old: a git worktree at 6ac5136, new: the change
    (cd $src && PYTHONPATH=$src /work/main/.venv/bin/python -m lowrl_ros.cli demo --robot legged --retrain --seconds 80 --no-record --quiet --session-dir /tmp/abft/$code$i > /tmp/abft/$code$i.out 2>&1)
    echo "$code$i done $(date +%T)"
  done
done
