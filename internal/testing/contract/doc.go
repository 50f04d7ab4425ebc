// Package contract holds only a test: code written against
// docs/design.md sections 3 and 5 alone, as a user outside the project
// writes it. If it stops compiling or passing, the public contract changed.
package contract
