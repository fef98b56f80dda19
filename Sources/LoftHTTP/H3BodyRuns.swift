/// Where a request stream's body lies in the QUIC stream's receive buffer. nghttp3 parses the
/// stream's bytes where QUIC received them (`QuicConnection.received`), and each DATA frame's
/// payload stays there, between the frame headers, until the reader takes it: the body is
/// buffered once, in QUIC's buffer, and this lists its runs. Positions count the stream's bytes
/// from its start; the runs are in order and do not touch (touching payloads make one run).
struct H3BodyRuns {
    /// (start, end) pairs from `head` on; the storage is kept (no allocation per run once warm).
    private var pairs: [Int] = []
    private var head = 0
    /// Payload bytes held.
    private(set) var bytes = 0

    var isEmpty: Bool { head == pairs.count }

    /// Where the first run starts.
    var firstStart: Int? { isEmpty ? nil : pairs[head] }

    /// Payload bytes at `start`; false when they come before the last run's end.
    mutating func add(at start: Int, _ n: Int) -> Bool {
        guard n > 0 else { return true }
        if !isEmpty {
            let last = pairs[pairs.count - 1]
            if start < last { return false }
            if start == last {
                pairs[pairs.count - 1] = start + n
                bytes += n
                return true
            }
        }
        pairs.append(start)
        pairs.append(start + n)
        bytes += n
        return true
    }

    /// Calls `body` with each run from the first (start, length), up to `max` bytes and `runs`
    /// runs; the bytes shown.
    func forEach(upTo max: Int, runs: Int, _ body: (Int, Int) -> Void) -> Int {
        var shown = 0
        var i = head
        while i < pairs.count && shown < max && (i - head) / 2 < runs {
            let n = min(pairs[i + 1] - pairs[i], max - shown)
            body(pairs[i], n)
            shown += n
            i += 2
        }
        return shown
    }

    /// The first `n` bytes were read.
    mutating func take(_ n: Int) {
        var left = min(n, bytes)
        bytes -= left
        while left > 0 {
            let len = pairs[head + 1] - pairs[head]
            if left < len {
                pairs[head] += left
                return
            }
            left -= len
            head += 2
        }
        compact()
    }

    mutating func removeAll() {
        pairs.removeAll(keepingCapacity: true)
        head = 0
        bytes = 0
    }

    private mutating func compact() {
        if isEmpty {
            pairs.removeAll(keepingCapacity: true)
            head = 0
        } else if head >= 64 && head * 2 >= pairs.count {
            pairs.removeFirst(head)
            head = 0
        }
    }
}
