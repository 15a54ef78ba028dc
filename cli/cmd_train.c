/* cli/cmd_train.c — placeholder until the command lands: says so and fails. */
#include "cli/commands.h"
#include "cli/output.h"

int cmd_train(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    return cli_error("train", "this command is not built yet");
}
