// swift-tools-version:6.0
import PackageDescription

// Each C target is the only place its library's headers are included; Swift sees only the
// shim's own plain-C header.

// The modules every TUN flow passes through (packets in and out, lwIP's glue, the flow table,
// the loop, the splice, the direct outbound's socket, the router) are built without Swift's
// run-time exclusivity checks: every access to a class's stored property there otherwise
// calls swift_beginAccess (a thread-local lookup and a walk of the accesses in progress), about
// 230 calls and a third of loft's user-space instructions per `Connection: close` request
// (docs/architecture.md, "The loop's rules"). The compile-time checks stay, and debug builds (the
// unit tests) keep the run-time checks too, so a conflicting access still traps there.
let flowPath: [SwiftSetting] = [.unsafeFlags(["-enforce-exclusivity=unchecked"], .when(configuration: .release))]

let package = Package(
    name: "loft",
    platforms: [.macOS(.v13)],
    products: [
        .executable(name: "loft", targets: ["loft"]),
        .executable(name: "loft-front", targets: ["loft-front"]),
    ],
    targets: [
        .target(
            name: "CLwIP",
            dependencies: ["CChecksum"],
            path: "CSupport/CLwIP",
            cSettings: [.unsafeFlags(["-I/usr/include/lwip", "-O2"])],
            linkerSettings: [.linkedLibrary("lwip")]
        ),
        .target(name: "CLinux", path: "CSupport/CLinux"),
        .target(name: "CChecksum", path: "CSupport/CChecksum", cSettings: [.unsafeFlags(["-O2"])]),
        .target(
            name: "CYAML",
            path: "CSupport/CYAML",
            linkerSettings: [.linkedLibrary("yaml")]
        ),
        .target(
            name: "CTLS",
            path: "CSupport/CTLS",
            linkerSettings: [.linkedLibrary("ssl"), .linkedLibrary("crypto")]
        ),
        .target(
            name: "CNghttp2",
            path: "CSupport/CNghttp2",
            linkerSettings: [.linkedLibrary("nghttp2")]
        ),
        .target(
            name: "CNgtcp2",
            dependencies: ["CTLS"],
            path: "CSupport/CNgtcp2",
            linkerSettings: [.linkedLibrary("ngtcp2"), .linkedLibrary("ngtcp2_crypto_gnutls"), .linkedLibrary("gnutls")]
        ),
        .target(
            name: "CNghttp3",
            path: "CSupport/CNghttp3",
            linkerSettings: [.linkedLibrary("nghttp3")]
        ),
        .target(
            name: "CAres",
            path: "CSupport/CAres",
            linkerSettings: [.linkedLibrary("cares")]
        ),
        .target(
            name: "CQRencode",
            path: "CSupport/CQRencode",
            linkerSettings: [.linkedLibrary("qrencode")]
        ),
        .target(
            name: "CZbar",
            path: "CSupport/CZbar",
            linkerSettings: [.linkedLibrary("zbar")]
        ),
        .target(
            name: "CPcap",
            path: "CSupport/CPcap",
            linkerSettings: [.linkedLibrary("pcap")]
        ),
        .target(
            name: "CImage",
            path: "CSupport/CImage",
            linkerSettings: [.linkedLibrary("png16"), .linkedLibrary("jpeg")]
        ),
        .target(name: "LoftCore", dependencies: ["CLinux", "CChecksum"], swiftSettings: flowPath),
        .target(name: "LoftProtocol", dependencies: ["LoftCore"]),
        .target(name: "LoftSSTP", dependencies: ["LoftCore", "CTLS"]),
        // The carrier stack in layers, each using only those above it: TLS (OpenSSL connections,
        // contexts, the pin policy) <- QUIC <- HTTP (HTTP/1.1, WebSocket, HTTP/2, HTTP/3) <- the
        // carriers and their listeners (docs/architecture.md).
        .target(name: "LoftTLS", dependencies: ["LoftCore", "LoftIO", "CTLS"]),
        .target(name: "LoftQUIC", dependencies: ["LoftCore", "LoftIO", "LoftTLS", "CNgtcp2"]),
        .target(name: "LoftHTTP", dependencies: ["LoftCore", "LoftIO", "LoftTLS", "LoftQUIC", "CTLS", "CNghttp2", "CNghttp3"]),
        .target(name: "LoftCarriers", dependencies: ["LoftCore", "LoftIO", "LoftTLS", "LoftQUIC", "LoftHTTP", "CTLS", "CNghttp2", "CNgtcp2", "CNghttp3"]),
        .target(name: "LoftFront", dependencies: ["LoftCore", "LoftIO", "LoftProtocol", "LoftCarriers", "LoftTLS", "LoftConfig", "LoftDirect", "LoftSessionStream", "LoftControl"]),
        .executableTarget(name: "loft-front", dependencies: ["LoftFront", "LoftConfig", "LoftCore", "LoftIO", "LoftCarriers", "LoftTLS", "LoftControl"]),
        // Dialing destinations from the host's own sockets (the direct and drop outbounds):
        // loft's `direct` and loft-front's streams both reach it without the client's outbounds.
        .target(name: "LoftDirect", dependencies: ["LoftCore", "LoftIO"], swiftSettings: flowPath),
        // A loft session's TCP stream as a byte stream: the holder's flows and the front's relays.
        .target(name: "LoftSessionStream", dependencies: ["LoftCore", "LoftIO", "LoftProtocol"]),
        .target(name: "LoftIO", dependencies: ["LoftCore", "CLinux", "CAres"], swiftSettings: flowPath),
        .target(name: "LoftConfig", dependencies: ["LoftCore", "CYAML"]),
        .target(name: "LoftRouting", dependencies: ["LoftCore"], swiftSettings: flowPath),
        .target(name: "LoftNetstack", dependencies: ["LoftCore", "LoftIO", "LoftSniff", "LoftFakeIP", "CLwIP", "CChecksum"], swiftSettings: flowPath),
        // Names from a flow's first bytes (TLS SNI, HTTP Host, QUIC Initial): sans-IO parsers.
        .target(name: "LoftSniff", dependencies: ["CTLS"]),
        // Fake-IP DNS: the pool of addresses standing for names, and the DNS answers that hand them out.
        .target(name: "LoftFakeIP", dependencies: ["LoftCore", "LoftSniff"]),
        .target(name: "LoftOutbounds", dependencies: ["LoftCore", "LoftIO", "LoftDirect", "LoftProtocol", "LoftSessionStream", "LoftCarriers", "LoftTLS", "LoftSSTP"]),
        .target(name: "LoftInputs", dependencies: ["LoftCore", "LoftIO", "LoftNetstack", "LoftCapture"], swiftSettings: flowPath),
        // Live captures of what the packet inputs read and write (`loft capture`, pcapng).
        .target(name: "LoftCapture", dependencies: ["LoftCore", "LoftIO", "LoftControl", "CPcap"]),
        .target(name: "LoftControl", dependencies: ["LoftCore", "LoftIO"]),
        // The running loft: its parts, the control socket's dispatch, reload and the status report.
        .target(name: "LoftRuntime", dependencies: ["LoftCore", "LoftIO", "LoftConfig", "LoftRouting", "LoftNetstack", "LoftFakeIP",
                                                    "LoftInputs", "LoftOutbounds", "LoftControl", "LoftCapture"]),
        // Connections as links, .loft files and encrypted files (docs/links.md).
        .target(name: "LoftLinks", dependencies: ["LoftCore", "LoftConfig", "LoftCarriers", "LoftTLS", "CTLS", "CQRencode", "CZbar", "CImage"]),
        .executableTarget(
            name: "loft",
            dependencies: ["LoftCore", "LoftIO", "LoftConfig", "LoftRouting", "LoftNetstack",
                           "LoftOutbounds", "LoftDirect", "LoftInputs", "LoftControl", "LoftRuntime", "LoftCapture", "LoftProtocol", "LoftCarriers", "LoftTLS", "LoftSSTP", "LoftLinks"]
        ),
        .testTarget(name: "LoftCoreTests", dependencies: ["LoftCore"]),
        .testTarget(name: "LoftIOTests", dependencies: ["LoftIO", "LoftCore", "CLinux", "LoftTestSupport"]),
        .testTarget(name: "LoftConfigTests", dependencies: ["LoftConfig"]),
        .testTarget(name: "LoftRoutingTests", dependencies: ["LoftRouting", "LoftCore", "LoftTestSupport"]),
        .testTarget(name: "LoftRuntimeTests", dependencies: ["LoftRuntime", "LoftConfig", "LoftRouting", "LoftNetstack", "LoftControl",
                                                            "LoftOutbounds", "LoftCarriers", "LoftTLS", "LoftCore", "LoftIO", "LoftTestSupport",
                                                            "LoftCapture"]),
        .testTarget(name: "LoftControlTests", dependencies: ["LoftControl", "LoftCore", "LoftIO", "LoftTestSupport"]),
        .testTarget(name: "LoftCaptureTests", dependencies: ["LoftCapture", "LoftControl", "LoftCore", "LoftIO", "LoftTestSupport"]),
        .testTarget(name: "LoftProtocolTests", dependencies: ["LoftProtocol", "LoftCore"]),
        .testTarget(name: "LoftLinksTests", dependencies: ["LoftLinks", "LoftConfig", "LoftCore", "LoftCarriers", "LoftTLS", "CImage"]),
        .testTarget(name: "LoftSniffTests", dependencies: ["LoftSniff", "LoftFakeIP", "LoftCore"]),
        .testTarget(name: "LoftSSTPTests", dependencies: ["LoftSSTP", "LoftCore"]),
        // Helpers more than one test target needs (the throwaway PKI); linked into tests only.
        .target(name: "LoftTestSupport", dependencies: ["LoftCarriers", "LoftTLS", "LoftCore", "LoftIO"], path: "Tests/LoftTestSupport"),
        .testTarget(name: "LoftResolverTests", dependencies: ["LoftIO", "LoftCore", "LoftTestSupport"]),
        .testTarget(name: "LoftCarriersTests", dependencies: ["LoftCarriers", "LoftTLS", "LoftQUIC", "LoftHTTP", "LoftCore", "LoftIO", "LoftTestSupport"]),
        .testTarget(name: "LoftNetstackTests", dependencies: ["LoftNetstack", "LoftCore", "LoftIO", "CLwIP", "LoftTestSupport", "LoftFakeIP"]),
        .testTarget(name: "LoftInputsTests", dependencies: ["LoftInputs", "LoftCore", "LoftIO", "LoftNetstack", "LoftTestSupport"]),
        .testTarget(name: "LoftFrontTests", dependencies: ["LoftFront", "LoftConfig", "LoftCore", "LoftProtocol", "LoftCarriers", "LoftTLS", "LoftIO", "LoftTestSupport"]),
        .testTarget(name: "LoftOutboundsTests", dependencies: ["LoftOutbounds", "LoftDirect", "LoftSessionStream", "LoftFront", "LoftConfig", "LoftCore", "LoftProtocol", "LoftCarriers", "LoftTLS", "LoftIO", "LoftTestSupport"]),
    ],
    swiftLanguageModes: [.v6]
)
