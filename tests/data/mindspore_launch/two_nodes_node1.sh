#!/bin/bash
# Two machines with four workers each; this is the second one: workers 4-7, no scheduler.
# NODE0_IP: the first machine's address, where the scheduler listens.

for((i=4;i<8;i++));
do
    export MS_WORKER_NUM=8
    export MS_SCHED_HOST=$NODE0_IP
    export MS_SCHED_PORT=8118
    export MS_ROLE=MS_WORKER
    export MS_NODE_ID=$i
    pytest -s -v ./train.py > worker_$i.log 2>&1 &
done
