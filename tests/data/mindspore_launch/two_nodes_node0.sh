#!/bin/bash
# Two machines with four workers each; this is the first one: workers 0-3, then the scheduler.
# NODE0_IP: this machine's address, which the other machine must reach.

for((i=0;i<4;i++));
do
    export MS_WORKER_NUM=8              # workers in the whole cluster, both machines
    export MS_SCHED_HOST=$NODE0_IP      # the scheduler runs here
    export MS_SCHED_PORT=8118
    export MS_ROLE=MS_WORKER
    export MS_NODE_ID=$i
    pytest -s -v ./train.py > worker_$i.log 2>&1 &
done

export MS_WORKER_NUM=8
export MS_SCHED_HOST=$NODE0_IP
export MS_SCHED_PORT=8118
export MS_ROLE=MS_SCHED
pytest -s -v ./train.py > scheduler.log 2>&1 &
