package cli

// commands are the subcommands of aegis, in the order `aegis help` lists
// them. Adding one is a line here and a file beside this one that defines
// its command value.
var commands = []command{
	benchCommand,
	consoleCommand,
	inspectCommand,
	labCommand,
	nodeCommand,
	scheduleCommand,
	servicesCommand,
}
