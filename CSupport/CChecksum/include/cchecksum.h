// The Internet checksum's sum (RFC 1071), the one implementation: lwIP's checksum hook
// (CLwIP's lwip_standard_chksum) and Swift's InternetChecksum both call it.
#ifndef CCHECKSUM_H
#define CCHECKSUM_H
#include <stddef.h>
#include <stdint.h>

/// The one's-complement sum of `len` bytes read as 16-bit words in memory order (a last odd
/// byte padded with zero), folded to 16 bits, not complemented (lwIP's lwip_standard_chksum
/// contract; on a little-endian machine the byte-swapped sum of the big-endian words, RFC 1071
/// section 2(B)).
uint16_t loft_checksum_sum(const void *data, size_t len);
#endif
