//! The subscription events (to come).
