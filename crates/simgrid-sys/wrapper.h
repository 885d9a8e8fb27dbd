#include <simgrid/engine.h>
#include <simgrid/actor.h>
#include <simgrid/mailbox.h>
#include <simgrid/comm.h>
#include <simgrid/host.h>
#include <simgrid/link.h>
#include <simgrid/version.h>
