#!/bin/bash
# One machine: eight workers, then the scheduler, all on the loopback address.

for((i=0;i<8;i++));
do
    export MS_WORKER_NUM=8          # workers in the whole cluster
    export MS_SCHED_HOST=127.0.0.1  # the scheduler's address
    export MS_SCHED_PORT=8118       # the scheduler's port
    export MS_ROLE=MS_WORKER        # this process is a worker
    export MS_NODE_ID=$i            # optional: the worker's id
    pytest -s -v ./train.py > worker_$i.log 2>&1 &
done

export MS_WORKER_NUM=8
export MS_SCHED_HOST=127.0.0.1
export MS_SCHED_PORT=8118
export MS_ROLE=MS_SCHED             # this process is the scheduler
pytest -s -v ./train.py > scheduler.log 2>&1 &
