// swift-tools-version:6.0
import PackageDescription

// Each C target is the only place its library's headers are included; Swift sees only the
// shim's own plain-C header.
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
            path: "CSupport/CLwIP",
            cSettings: [.unsafeFlags(["-I/usr/include/lwip", "-O2"])],
            linkerSettings: [.linkedLibrary("lwip")]
        ),
        .target(name: "CLinux", path: "CSupport/CLinux"),
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
            name: "CImage",
            path: "CSupport/CImage",
            linkerSettings: [.linkedLibrary("png16"), .linkedLibrary("jpeg")]
        ),
        .target(name: "LoftCore", dependencies: ["CLinux"]),
        .target(name: "LoftProtocol", dependencies: ["LoftCore"]),
        .target(name: "LoftSSTP", dependencies: ["LoftCore", "CTLS"]),
        .target(name: "LoftCarriers", dependencies: ["LoftCore", "LoftIO", "CTLS", "CNghttp2", "CNgtcp2", "CNghttp3", "CLinux"]),
        .target(name: "LoftFront", dependencies: ["LoftCore", "LoftIO", "LoftProtocol", "LoftCarriers", "LoftConfig", "LoftOutbounds", "LoftControl", "CLinux"]),
        .executableTarget(name: "loft-front", dependencies: ["LoftFront", "LoftConfig", "LoftCore", "LoftIO", "LoftCarriers", "LoftControl"]),
        .target(name: "LoftIO", dependencies: ["LoftCore", "CLinux", "CAres"]),
        .target(name: "LoftConfig", dependencies: ["LoftCore", "CYAML"]),
        .target(name: "LoftRouting", dependencies: ["LoftCore", "LoftConfig"]),
        .target(name: "LoftNetstack", dependencies: ["LoftCore", "LoftIO", "CLwIP"]),
        .target(name: "LoftOutbounds", dependencies: ["LoftCore", "LoftIO", "LoftRouting", "LoftProtocol", "LoftCarriers", "LoftSSTP", "CLinux"]),
        .target(name: "LoftInputs", dependencies: ["LoftCore", "LoftIO", "LoftNetstack", "LoftConfig", "LoftRouting", "CLinux"]),
        .target(name: "LoftControl", dependencies: ["LoftCore", "LoftIO", "CLinux"]),
        // Connections as links, .loft files and encrypted files (docs/links.md).
        .target(name: "LoftLinks", dependencies: ["LoftCore", "LoftConfig", "LoftCarriers", "CTLS", "CQRencode", "CZbar", "CImage"]),
        .executableTarget(
            name: "loft",
            dependencies: ["LoftCore", "LoftIO", "LoftConfig", "LoftRouting", "LoftNetstack",
                           "LoftOutbounds", "LoftInputs", "LoftControl", "LoftProtocol", "LoftCarriers", "LoftSSTP", "LoftLinks"]
        ),
        .testTarget(name: "LoftCoreTests", dependencies: ["LoftCore"]),
        .testTarget(name: "LoftIOTests", dependencies: ["LoftIO", "LoftCore", "CLinux", "LoftTestSupport"]),
        .testTarget(name: "LoftConfigTests", dependencies: ["LoftConfig"]),
        .testTarget(name: "LoftRoutingTests", dependencies: ["LoftRouting", "LoftConfig", "LoftCore", "LoftTestSupport"]),
        .testTarget(name: "LoftControlTests", dependencies: ["LoftControl", "LoftCore", "LoftIO", "CLinux", "LoftTestSupport"]),
        .testTarget(name: "LoftProtocolTests", dependencies: ["LoftProtocol", "LoftCore"]),
        .testTarget(name: "LoftLinksTests", dependencies: ["LoftLinks", "LoftConfig", "LoftCore", "LoftCarriers", "CImage"]),
        .testTarget(name: "LoftSSTPTests", dependencies: ["LoftSSTP", "LoftCore"]),
        // Helpers more than one test target needs (the throwaway PKI); linked into tests only.
        .target(name: "LoftTestSupport", dependencies: ["LoftCarriers", "LoftCore", "LoftIO"], path: "Tests/LoftTestSupport"),
        .testTarget(name: "LoftResolverTests", dependencies: ["LoftIO", "LoftCore", "LoftTestSupport"]),
        .testTarget(name: "LoftCarriersTests", dependencies: ["LoftCarriers", "LoftCore", "LoftIO", "LoftTestSupport"]),
        .testTarget(name: "LoftNetstackTests", dependencies: ["LoftNetstack", "LoftCore", "LoftIO", "CLwIP", "LoftTestSupport"]),
        .testTarget(name: "LoftInputsTests", dependencies: ["LoftInputs", "LoftCore", "LoftIO", "LoftOutbounds", "LoftNetstack", "LoftConfig", "LoftTestSupport"]),
        .testTarget(name: "LoftFrontTests", dependencies: ["LoftFront", "LoftConfig", "LoftCore", "LoftProtocol", "LoftCarriers", "LoftIO", "LoftTestSupport"]),
        .testTarget(name: "LoftOutboundsTests", dependencies: ["LoftOutbounds", "LoftFront", "LoftConfig", "LoftCore", "LoftProtocol", "LoftCarriers", "LoftIO", "LoftTestSupport"]),
    ],
    swiftLanguageModes: [.v6]
)
