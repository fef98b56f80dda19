import Glibc

/// The time of day, for what is read by people or other programs (log lines, capture
/// timestamps): never for deadlines, which run on the loop's monotonic clock.
public enum WallClock {
    /// Microseconds since the Unix epoch.
    public static func microseconds() -> UInt64 {
        var ts = timespec()
        clock_gettime(CLOCK_REALTIME, &ts)
        return UInt64(ts.tv_sec) * 1_000_000 + UInt64(ts.tv_nsec) / 1000
    }
}
