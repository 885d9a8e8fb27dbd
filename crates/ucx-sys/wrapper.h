#include <ucp/api/ucp.h>
