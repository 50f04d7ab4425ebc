package runner

// StoreURL returns the URL of the session's store of record now (a
// promotion moves it to the standby), for tests that read it with SQL
// apart from the lab.
func (s *Session) StoreURL() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.storeURLLocked()
}
