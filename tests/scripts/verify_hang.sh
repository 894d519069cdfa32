# Verifier for the timeout tests: on val.txt = hang, a shell whose children never end;
# on val.txt = stubborn, the same but deaf to SIGTERM/SIGINT.
v=$(cat val.txt)
if [ "$v" = hang ]; then
    echo $$ > "$E2E_OUT/verifier.pid"
    sh -c 'echo $$ > "$E2E_OUT/inner.pid"; sleep 300 & echo $! > "$E2E_OUT/bg.pid"; sleep 300'
fi
if [ "$v" = stubborn ]; then
    # ignores SIGTERM and SIGINT (and so do its children): only SIGKILL ends it
    echo $$ > "$E2E_OUT/verifier.pid"
    trap '' TERM INT
    sh -c 'sleep 300 & echo $! > "$E2E_OUT/bg.pid"; wait'
fi
echo "score: $v"
