# Shared by quic-interop.test.sh, quic-hostile.test.sh and quic-partial-open.test.sh (sourced
# after lib.sh, never run): what the tests against aioquic (Tests/interop/) add to
# interop-lib.sh: the Python clients' PASS/FAIL lines as the test's cases (client_results).

. "$(dirname "${BASH_SOURCE[0]}")/interop-lib.sh"
python3 -c 'import aioquic' 2>/dev/null || die "python3 cannot import aioquic (pip install aioquic)"

# client_results CASE...: the clients' notes ("  # " lines of $T_DIR/client.err) as notes, their
# PASS/FAIL lines ($T_DIR/client.out) as passes and failures, and each CASE they did not
# report as a failure.
client_results() {
    client_notes "$T_DIR/client.err" client
    RELAY_ERR=$T_DIR/client.err relay "$T_DIR/client.out" "$@"
}
