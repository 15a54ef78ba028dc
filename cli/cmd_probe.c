/* cli/cmd_probe.c — placeholder until the command lands: says so and fails. */
#include "cli/commands.h"
#include "cli/output.h"

int cmd_probe(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    return cli_error("probe", "this command is not built yet");
}
