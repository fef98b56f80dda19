#include "ctls.h"
#include <openssl/crypto.h>
int ctls_version_number(void) { return (int)OpenSSL_version_num(); }
