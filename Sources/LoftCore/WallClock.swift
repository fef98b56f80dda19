/// The time of day, for what is read by people or other programs (log lines, capture
/// timestamps): never for deadlines, which run on the loop's monotonic clock.
public enum WallClock {
    /// Microseconds since the Unix epoch.
    public static func microseconds() -> UInt64 { Syscall.realTimeMicroseconds() }
}
