#!/bin/bash
# One machine, eight workers, with disaster recovery: a process that dies is started again with
# the same variables and rejoins. Recovery wants explicit node ids: `sched` for the scheduler,
# `worker_<i>` for the workers.

export MS_ENABLE_RECOVERY=1                 # recovery on
export MS_RECOVERY_PATH=/path/to/recovery/  # where the cluster keeps its recovery state

export MS_WORKER_NUM=8
export MS_SCHED_HOST=127.0.0.1
export MS_SCHED_PORT=8118
export MS_ROLE=MS_SCHED
export MS_NODE_ID=sched
pytest -s -v ./train.py > scheduler.log 2>&1 &

for((i=0;i<8;i++));
do
    export MS_WORKER_NUM=8
    export MS_SCHED_HOST=127.0.0.1
    export MS_SCHED_PORT=8118
    export MS_ROLE=MS_WORKER
    export MS_NODE_ID=worker_$i
    pytest -s -v ./train.py > worker_$i.log 2>&1 &
done
