/* cli/cmd_accum.c — placeholder until the command lands: says so and fails. */
#include "cli/commands.h"
#include "cli/output.h"

int cmd_accum(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    return cli_error("accum", "this command is not built yet");
}
