#!/bin/sh
# exec java org.apache.hadoop.mapred.YarnChild (a comment, not a command)
echo attempt_1700000000000_0042_m_000003_0
exec grep -r attempt_1700000000000_0042_m_000003_0 /data/yarn/logs
