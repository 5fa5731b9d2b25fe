package cli

import (
	"flag"
	"fmt"
	"io"

	"github.com/taskscope/taskscope/internal/auth"
)

// tokenCmd prints a new random token, and on a second line what stands for
// it in a token file (its SHA-256): the token goes to the agent or the
// script, the hash into the server's file.
func tokenCmd(args []string, stdout, stderr io.Writer) error {
	fl := flag.NewFlagSet("token", flag.ContinueOnError)
	fl.SetOutput(stderr)
	fl.Usage = func() {
		fmt.Fprintln(stderr, "usage: taskscope token\n\nPrints a new random token, then sha256:HASH, which stands for it in a server's token file.")
	}
	if err := fl.Parse(args); err != nil {
		return err
	}
	tok := auth.NewToken()
	fmt.Fprintln(stdout, tok)
	fmt.Fprintln(stdout, auth.Hash(tok))
	return nil
}
